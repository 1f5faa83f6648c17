//! gRPC's length-prefixed messages on an HTTP body: one byte of flags (0: not compressed,
//! the only kind the room sends or asks for), four bytes of length (big-endian), the message.
//! The status comes in the trailers, or in the headers of an answer without messages.

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use tonic::Status;

/// One message framed.
pub(super) fn frame(message: &[u8]) -> Bytes {
    let mut framed = Vec::with_capacity(message.len() + 5);
    framed.push(0);
    let length = u32::try_from(message.len()).unwrap_or(u32::MAX);
    framed.extend_from_slice(&length.to_be_bytes());
    framed.extend_from_slice(message);
    Bytes::from(framed)
}

/// What comes next on an answer's body.
pub(super) enum Next {
    /// One message, unframed.
    Message(Bytes),
    /// The end, with the call's status.
    End(Status),
}

/// The messages of a gRPC answer's body, one at a time.
pub(super) struct Frames {
    body: Body,
    buffer: Vec<u8>,
    /// The status the answer's headers carried (an answer without messages), if any.
    early: Option<Status>,
    ended: bool,
}

impl Frames {
    /// Reads `body`; `early` is the status of the answer's headers, if they carry one.
    pub(super) fn new(body: Body, early: Option<Status>) -> Frames {
        Frames {
            body,
            buffer: Vec::new(),
            early,
            ended: false,
        }
    }

    /// The next message, or the end with its status; `None` after the end.
    ///
    /// # Cancel safety
    /// Cancel-safe: what was read stays buffered for the next call.
    pub(super) async fn next(&mut self) -> Option<Next> {
        if self.ended {
            return None;
        }
        loop {
            if let Some(message) = self.take_message() {
                return Some(message);
            }
            match self.body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.buffer.extend_from_slice(&data),
                    Err(frame) => {
                        if let Some(trailers) = frame.trailers_ref() {
                            let status = Status::from_header_map(trailers)
                                .unwrap_or_else(|| Status::unknown("no grpc-status"));
                            return self.end(status);
                        }
                    }
                },
                Some(Err(e)) => return self.end(Status::unavailable(e.to_string())),
                None => {
                    let status = self
                        .early
                        .take()
                        .unwrap_or_else(|| Status::unknown("the answer ended without a status"));
                    return self.end(status);
                }
            }
        }
    }

    fn end(&mut self, status: Status) -> Option<Next> {
        self.ended = true;
        Some(Next::End(status))
    }

    /// A complete message from the buffer, if it holds one.
    fn take_message(&mut self) -> Option<Next> {
        let header: [u8; 5] = self.buffer.get(..5)?.try_into().ok()?;
        if header[0] != 0 {
            self.ended = true;
            return Some(Next::End(Status::internal("a compressed message")));
        }
        let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        let end = 5 + usize::try_from(length).ok()?;
        if self.buffer.len() < end {
            return None;
        }
        let message = Bytes::copy_from_slice(&self.buffer[5..end]);
        self.buffer.drain(..end);
        Some(Next::Message(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;
    use http_body_util::StreamBody;

    fn body(chunks: Vec<Result<http_body::Frame<Bytes>, std::io::Error>>) -> Body {
        Body::new(StreamBody::new(tokio_stream::iter(chunks)))
    }

    #[tokio::test]
    async fn messages_split_across_chunks_come_whole_then_the_trailers_status() {
        let mut wire = frame(b"hello").to_vec();
        wire.extend_from_slice(&frame(b""));
        wire.extend_from_slice(&frame(b"world"));
        let (a, b) = wire.split_at(7);
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "5".parse().unwrap());
        trailers.insert("grpc-message", "gone".parse().unwrap());
        let mut frames = Frames::new(
            body(vec![
                Ok(http_body::Frame::data(Bytes::copy_from_slice(a))),
                Ok(http_body::Frame::data(Bytes::copy_from_slice(b))),
                Ok(http_body::Frame::trailers(trailers)),
            ]),
            None,
        );
        let mut seen = Vec::new();
        while let Some(next) = frames.next().await {
            seen.push(match next {
                Next::Message(m) => String::from_utf8(m.to_vec()).unwrap(),
                Next::End(s) => format!("end {:?} {}", s.code(), s.message()),
            });
        }
        assert_eq!(seen, ["hello", "", "world", "end NotFound gone"]);
    }

    #[tokio::test]
    async fn an_answer_without_messages_ends_with_the_status_of_its_headers() {
        let mut frames = Frames::new(body(vec![]), Some(Status::unimplemented("no")));
        match frames.next().await {
            Some(Next::End(s)) => assert_eq!(s.code(), tonic::Code::Unimplemented),
            _ => panic!("expected the end"),
        }
        assert!(frames.next().await.is_none());
    }
}
