"""A program run by `tenure run` that writes to the application's table, fenced (or not).

It reads what `tenure run` exports: TENURE_NAME, TENURE_CANDIDATE, TENURE_TERM and
TENURE_FENCE_SQL, and from the test: APP_BACKEND (postgres|mysql|sqlite), APP_URL (the database),
APP_TABLE, APP_OUT (a file to append one JSON line per event to), APP_FENCE (1 or 0) and
APP_PAUSE (1: stop itself with SIGSTOP before it writes, as a process pause would).

This is the pattern docs/guides/fencing.md ("From any language") documents, per driver:
  - psycopg 3: a RawCursor, which takes PostgreSQL's own $1, $2, $3 parameters;
  - PyMySQL: the statement's `?` become `%s` (its paramstyle);
  - sqlite3: the statement as it is (qmark paramstyle).
"""

import json
import os
import signal
import sys
import urllib.parse

BACKEND = os.environ["APP_BACKEND"]
URL = os.environ["APP_URL"]
TABLE = os.environ["APP_TABLE"]
OUT = os.environ["APP_OUT"]
FENCE = os.environ.get("APP_FENCE", "1") == "1"
PAUSE = os.environ.get("APP_PAUSE", "0") == "1"

NAME = os.environ["TENURE_NAME"]
HOLDER = os.environ["TENURE_CANDIDATE"]
TERM = int(os.environ["TENURE_TERM"])
FENCE_SQL = os.environ["TENURE_FENCE_SQL"]


def emit(event, **fields):
    with open(OUT, "a", encoding="utf-8") as out:
        out.write(json.dumps({"event": event, "term": TERM, "pid": os.getpid(), **fields}) + "\n")


def connect():
    if BACKEND == "postgres":
        import psycopg

        conn = psycopg.connect(URL, cursor_factory=psycopg.RawCursor)
        return conn, conn.cursor(), "$1"
    if BACKEND == "mysql":
        import pymysql

        u = urllib.parse.urlparse(URL)
        conn = pymysql.connect(
            host=u.hostname,
            port=u.port or 3306,
            user=urllib.parse.unquote(u.username or "root"),
            password=urllib.parse.unquote(u.password or ""),
            database=u.path.lstrip("/"),
            autocommit=False,
        )
        return conn, conn.cursor(), "%s"
    if BACKEND == "sqlite":
        import sqlite3

        path = URL.split("://", 1)[1] if "://" in URL else URL.split(":", 1)[1]
        conn = sqlite3.connect(path.split("?")[0], isolation_level=None, timeout=30)
        return conn, conn.cursor(), "?"
    sys.exit(f"unknown APP_BACKEND {BACKEND!r}")


def main():
    conn, cur, param = connect()
    fence_sql = FENCE_SQL.replace("?", "%s") if BACKEND == "mysql" else FENCE_SQL
    insert = f"INSERT INTO {TABLE} (term, holder) VALUES ({param}, {param.replace('1', '2')})"
    if PAUSE:
        emit("paused")
        os.kill(os.getpid(), signal.SIGSTOP)  # a process pause: the lease may end meanwhile
        emit("resumed")
    if BACKEND == "sqlite":
        cur.execute("BEGIN")
    cur.execute(insert, (TERM, HOLDER))
    if FENCE:
        cur.execute(fence_sql, (NAME, HOLDER, TERM))
        if cur.fetchone() is None:
            conn.rollback()
            emit("refused")
            return
    conn.commit()
    emit("committed", fenced=FENCE)


if __name__ == "__main__":
    main()
