//! A streamed answer of the JSON gateway, as Patroni reads it.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A streamed answer of the JSON gateway (`/v3/watch`, `/v3/lease/keepalive`), as Patroni
/// reads it: HTTP/1.1, chunked, one JSON object a line. Closed when dropped.
pub(crate) struct GatewayStream {
    /// The HTTP status.
    pub status: u16,
    lines: mpsc::Receiver<String>,
    stream: std::net::TcpStream,
}

impl GatewayStream {
    /// POSTs `json` to `path` and reads the answer's head.
    pub(crate) fn open(addr: SocketAddr, path: &str, json: &str) -> GatewayStream {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{json}",
            json.len()
        );
        stream.write_all(request.as_bytes()).expect("send");
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut head = String::new();
        reader.read_line(&mut head).expect("status line");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {head:?}"));
        let mut chunked = false;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("header");
            if line.trim().is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            chunked |= lower.starts_with("transfer-encoding:") && lower.contains("chunked");
        }
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut pending = Vec::new();
            let emit = |bytes: &[u8], pending: &mut Vec<u8>| -> bool {
                pending.extend_from_slice(bytes);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let text = String::from_utf8_lossy(&line).trim().to_string();
                    if !text.is_empty() && tx.send(text).is_err() {
                        return false;
                    }
                }
                true
            };
            if !chunked {
                let mut rest = Vec::new();
                let _ = reader.read_to_end(&mut rest);
                rest.push(b'\n');
                emit(&rest, &mut pending);
                return;
            }
            loop {
                let mut size = String::new();
                if reader.read_line(&mut size).unwrap_or(0) == 0 {
                    return;
                }
                let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
                    return;
                };
                if size == 0 {
                    let _ = emit(b"\n", &mut pending);
                    return;
                }
                let mut chunk = vec![0; size + 2];
                if reader.read_exact(&mut chunk).is_err() {
                    return;
                }
                if !emit(&chunk[..size], &mut pending) {
                    return;
                }
            }
        });
        GatewayStream {
            status,
            lines,
            stream,
        }
    }

    /// The next JSON object of the answer, waiting at most `within`.
    pub(crate) fn next(&self, within: Duration) -> Option<Value> {
        self.next_or_why(within).ok()
    }

    /// The same, or why there is none: the answer ended, or nothing came within `within`.
    pub(crate) fn next_or_why(&self, within: Duration) -> Result<Value, String> {
        let line = self.lines.recv_timeout(within).map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => format!("nothing came within {within:?}"),
            mpsc::RecvTimeoutError::Disconnected => "the answer ended".to_string(),
        })?;
        Ok(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
    }

    /// Everything until the answer ends (at most `within`).
    pub(crate) fn rest(&self, within: Duration) -> Vec<Value> {
        let deadline = Instant::now() + within;
        let mut all = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => all.push(serde_json::from_str(&line).unwrap_or(Value::String(line))),
                Err(mpsc::RecvTimeoutError::Disconnected) => return all,
                Err(mpsc::RecvTimeoutError::Timeout) => break,
            }
        }
        panic!("the streamed answer did not end within {within:?}: {all:?}");
    }
}

impl Drop for GatewayStream {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}
