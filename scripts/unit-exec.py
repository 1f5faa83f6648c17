#!/usr/bin/env python3
"""Starts a systemd service unit's ExecStart the way systemd would, where systemd is not PID 1
(a container, CI): scripts/deb-check.sh runs tenure-run@demo with it.

    scripts/unit-exec.py UNIT_FILE [INSTANCE]

What it does as systemd does (systemd.exec(5), systemd.service(5)):
- specifiers %i %I %n %N %p %P %S %t %u %h %% in Environment=, EnvironmentFile= and ExecStart=;
- a clean environment: PATH, then HOME, USER, LOGNAME and SHELL of User=, then Environment=
  lines, then EnvironmentFile= files (later ones win; a `-` prefix makes a file optional);
- StateDirectory=: /var/lib/NAME, created and given to User= and Group=;
- User= and Group=: the command runs as them (setpriv), with the user's groups;
- ExecStart=: words split with systemd's quoting, `${VAR}` replaced inside a word, a word
  `$VAR` split at whitespace into zero or more words, `$$` a plain `$`;
- Type=notify: NOTIFY_SOCKET points at a datagram socket; each message the service sends is
  printed on stderr as `unit-exec: notify READY=1` (NotifyAccess=main is taken as given);
- KillMode=mixed / control-group: SIGTERM or SIGINT to this script goes to the main process
  only, as `systemctl stop` does with KillMode=mixed; the script exits with its status.

It refuses (exit 2, naming the directive) any [Service] directive it neither emulates nor
knows to be about supervision only (restarts, timeouts, kill mode), so that what it runs can
never silently differ from what the unit says. Restart= and the timeouts are not emulated: it
runs the command once.
"""

import os
import pwd
import grp
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile

# Directives this script carries out.
EMULATED = {
    "Type", "NotifyAccess", "User", "Group", "StateDirectory", "Environment",
    "EnvironmentFile", "ExecStart", "KillMode",
}
# Directives about what systemd does around the process (restarts, timeouts), not how it
# starts it: accepted, not emulated.
SUPERVISION_ONLY = {
    "TimeoutStopSec", "TimeoutStartSec", "Restart", "RestartSec", "RestartPreventExitStatus",
}
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def fail(message):
    print(f"unit-exec: {message}", file=sys.stderr)
    sys.exit(2)


def parse_unit(path):
    """[(section, key, value)] in file order, continuation lines joined."""
    entries, section, pending = [], None, ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = pending + raw.rstrip("\n")
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            stripped = line.strip()
            if not stripped or stripped[0] in "#;":
                continue
            if stripped.startswith("[") and stripped.endswith("]"):
                section = stripped[1:-1]
                continue
            key, sep, value = stripped.partition("=")
            if not sep:
                fail(f"{path}: not a KEY=VALUE line: {stripped!r}")
            entries.append((section, key.strip(), value.strip()))
    return entries


def unescape_instance(text):
    """systemd-escape's reverse: - is /, \\xNN a byte."""
    text = text.replace("-", "/")
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), text)


def specifiers(unit_name, instance, user):
    prefix = unit_name.split("@")[0] if "@" in unit_name else unit_name.rsplit(".", 1)[0]
    full = unit_name.replace("@.", f"@{instance}.") if instance is not None else unit_name
    home = pwd.getpwnam(user).pw_dir if user else "/root"
    return {
        "i": instance or "", "I": unescape_instance(instance or ""), "n": full,
        "N": full.rsplit(".", 1)[0], "p": prefix, "P": unescape_instance(prefix),
        "S": "/var/lib", "t": "/run", "u": user or "root", "h": home, "%": "%",
    }


def expand_specifiers(text, table):
    def one(m):
        if m.group(1) not in table:
            fail(f"specifier %{m.group(1)} is not emulated")
        return table[m.group(1)]
    return re.sub(r"%(.)", one, text)


def split_words(text):
    """systemd's word splitting: [(word, quoted)], quotes removed, C escapes in quotes."""
    words, i, n = [], 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        word, quoted = "", False
        while i < n and not text[i].isspace():
            c = text[i]
            if c in "'\"":
                quoted = True
                end = text.find(c, i + 1)
                if end < 0:
                    fail(f"unbalanced quote in {text!r}")
                word += text[i + 1:end].replace("\\" + c, c) if c == '"' else text[i + 1:end]
                i = end + 1
            elif c == "\\" and i + 1 < n:
                word += text[i + 1]
                i += 2
            else:
                word += c
                i += 1
        words.append((word, quoted))
    return words


def expand_command(text, env):
    """ExecStart's words after variable expansion."""
    argv = []
    for word, quoted in split_words(text):
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole and not quoted:
            argv.extend(env.get(whole.group(1), "").split())
            continue
        word = word.replace("$$", "\0")
        word = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word)
        argv.append(word.replace("\0", "$"))
    return argv


def read_env_file(path):
    """systemd's EnvironmentFile= format: KEY=VALUE lines, # and ; comments, quoted values."""
    env = {}
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            key, sep, value = line.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not NAME.fullmatch(key):
                fail(f"{path}:{lineno}: not KEY=VALUE: {line!r}")
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                quote, value = value[0], value[1:-1]
                if quote == '"':
                    value = re.sub(r'\\(["\\`$])', r"\1", value)
            env[key] = value
    return env


def main():
    if len(sys.argv) not in (2, 3):
        fail("usage: unit-exec.py UNIT_FILE [INSTANCE]")
    path = sys.argv[1]
    instance = sys.argv[2] if len(sys.argv) == 3 else None
    unit_name = os.path.basename(path)
    if ("@." in unit_name) != (instance is not None):
        fail(f"{unit_name}: give an INSTANCE exactly when the unit is a template")

    service = {}
    lists = {"Environment": [], "EnvironmentFile": []}
    for section, key, value in parse_unit(path):
        if section != "Service":
            continue
        if key not in EMULATED | SUPERVISION_ONLY:
            fail(f"{unit_name}: [Service] {key}= is not emulated; teach unit-exec.py or drop it")
        if key in lists:
            lists[key].append(value)
        else:
            service[key] = value

    user, group = service.get("User"), service.get("Group")
    table = specifiers(unit_name, instance, user)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"}
    if user:
        entry = pwd.getpwnam(user)
        env.update(HOME=entry.pw_dir, USER=user, LOGNAME=user, SHELL=entry.pw_shell)
    for line in lists["Environment"]:
        for word, _ in split_words(expand_specifiers(line, table)):
            key, sep, value = word.partition("=")
            if not sep or not NAME.fullmatch(key):
                fail(f"Environment={line}: not KEY=VALUE")
            env[key] = value
    for line in lists["EnvironmentFile"]:
        optional = line.startswith("-")
        file = expand_specifiers(line.lstrip("-"), table)
        if os.path.exists(file):
            env.update(read_env_file(file))
        elif not optional:
            fail(f"EnvironmentFile={file} does not exist (systemd would not start the unit)")

    uid = pwd.getpwnam(user).pw_uid if user else 0
    gid = grp.getgrnam(group).gr_gid if group else (pwd.getpwnam(user).pw_gid if user else 0)
    for name in service.get("StateDirectory", "").split():
        state = os.path.join("/var/lib", expand_specifiers(name, table))
        os.makedirs(state, mode=0o755, exist_ok=True)
        os.chown(state, uid, gid)

    if "ExecStart" not in service:
        fail(f"{unit_name}: no ExecStart=")
    exec_start = expand_specifiers(service["ExecStart"], table)
    if exec_start[:1] in "-@:+!":
        fail(f"ExecStart= prefix {exec_start[0]!r} is not emulated")
    argv = expand_command(exec_start, env)
    if user or group:
        argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups", "--"] + argv

    notify = None
    if service.get("Type", "simple") == "notify":
        directory = tempfile.mkdtemp(prefix="unit-exec-")
        os.chmod(directory, 0o755)
        env["NOTIFY_SOCKET"] = os.path.join(directory, "notify")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(env["NOTIFY_SOCKET"])
        os.chmod(env["NOTIFY_SOCKET"], 0o666)

    print(f"unit-exec: {' '.join(argv)}", file=sys.stderr, flush=True)
    child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, cwd="/")
    print(f"unit-exec: main pid {child.pid}", file=sys.stderr, flush=True)
    # KillMode=mixed (and the default): the stop signal goes to the main process.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    while child.poll() is None:
        if notify is None:
            try:
                child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            continue
        try:
            ready, _, _ = select.select([notify], [], [], 0.2)
        except InterruptedError:
            continue
        if ready:
            message = notify.recv(4096).decode("utf-8", "replace").strip()
            for line in message.splitlines():
                print(f"unit-exec: notify {line}", file=sys.stderr, flush=True)
    code = child.returncode
    print(f"unit-exec: main process exited {code}", file=sys.stderr, flush=True)
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
