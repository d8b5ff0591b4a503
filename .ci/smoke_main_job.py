"""CI's check of the README's first command: `bash scripts/up.sh` serves, and Ctrl-C stops it.

Run from a fresh clone before anything else is installed, with the standard library only (the
project's venv does not exist yet). It starts the main job exactly as the README says, waits for
the router's `/ready`, sends one chat completion and one streamed completion to :8000, then sends
SIGINT to the job's process group (what Ctrl-C in a terminal does) and checks that every process
the job started is gone. Exit 0 when all of that holds; otherwise 1, with the job's last output.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROUTER = "http://127.0.0.1:8000"
MODEL = "openai/gpt-oss-120b"
INSTALL_AND_READY_WITHIN_S = 600.0  # pip install included; a warm cache takes ~90 s
STOPPED_WITHIN_S = 30.0
OUTPUT_KEPT_LINES = 60


def descendants(root: int) -> dict[int, str]:
    """Every living process below `root` (by parent pid), with its command line."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = parent_of(int(entry.name))
            if parent is not None:
                children[parent].append(int(entry.name))
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found[child] = cmdline(child)
                todo.append(child)
    return found


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def alive(pid: int, line: str) -> bool:
    """`pid` still runs the same command line (not a zombie, not a reused pid)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and cmdline(pid) == line


def kill_group(pid: int) -> None:
    """SIGKILL the job's process group, if anything of it is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def post(path: str, body: dict[str, object]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        ROUTER + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, response.read()


def ready() -> bool:
    try:
        with urllib.request.urlopen(ROUTER + "/ready", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def check_chat_completion() -> str:
    status, raw = post(
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16},
    )
    body = json.loads(raw)
    content = body["choices"][0]["message"]["content"]
    if status != 200 or not content or body["usage"]["completion_tokens"] < 1:
        raise AssertionError(f"chat completion: {status} {raw[:300]!r}")
    return f"chat completion: {body['usage']['completion_tokens']} tokens"


def check_streamed_completion() -> str:
    status, raw = post(
        "/v1/completions",
        {"model": MODEL, "prompt": "Count to five:", "max_tokens": 16, "stream": True},
    )
    events = [line[len(b"data: ") :] for line in raw.splitlines() if line.startswith(b"data: ")]
    if status != 200 or not events or events[-1] != b"[DONE]":
        raise AssertionError(f"streamed completion: {status}, ends with {raw[-200:]!r}")
    chunks = [json.loads(event) for event in events[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
    if not text:
        raise AssertionError(f"streamed completion carried no text: {raw[:300]!r}")
    return f"streamed completion: {len(chunks)} chunks, {len(text)} characters"


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    started = time.monotonic()
    job = subprocess.Popen(
        ["bash", "scripts/up.sh"],
        cwd=root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    output: collections.deque[str] = collections.deque(maxlen=OUTPUT_KEPT_LINES)

    def keep_output() -> None:
        assert job.stdout is not None
        for line in job.stdout:
            output.append(line)
            print(f"  | {line}", end="", flush=True)

    reader = threading.Thread(target=keep_output, daemon=True)
    reader.start()
    seen: dict[int, str] = {}
    try:
        deadline = started + INSTALL_AND_READY_WITHIN_S
        while not ready():
            if job.poll() is not None:
                raise AssertionError(f"`bash scripts/up.sh` exited with {job.returncode}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not ready within {INSTALL_AND_READY_WITHIN_S:g} s")
            seen.update(descendants(job.pid))
            time.sleep(1)
        ready_s = time.monotonic() - started
        print(f"smoke: ready {ready_s:.1f} s after `bash scripts/up.sh` (install included)")
        print(f"smoke: {check_chat_completion()}")
        print(f"smoke: first completion {time.monotonic() - started:.1f} s after the command")
        print(f"smoke: {check_streamed_completion()}")
        seen.update(descendants(job.pid))
        seen[job.pid] = cmdline(job.pid)
    except Exception as error:
        print(f"smoke: FAILED: {error}", file=sys.stderr)
        kill_group(job.pid)
        return 1
    os.killpg(job.pid, signal.SIGINT)
    try:
        job.wait(STOPPED_WITHIN_S)
    except subprocess.TimeoutExpired:
        print(f"smoke: FAILED: still running {STOPPED_WITHIN_S:g} s after Ctrl-C", file=sys.stderr)
        kill_group(job.pid)
        return 1
    deadline = time.monotonic() + STOPPED_WITHIN_S
    while left := [f"{pid} {line}" for pid, line in seen.items() if alive(pid, line)]:
        if time.monotonic() > deadline:
            print("smoke: FAILED: left running after Ctrl-C:", *left, sep="\n  ", file=sys.stderr)
            for pid in list(seen):
                if alive(pid, seen[pid]):
                    os.kill(pid, signal.SIGKILL)
            return 1
        time.sleep(0.5)
    reader.join(5)
    print(
        f"smoke: Ctrl-C stopped the main job (exit {job.returncode}) and all {len(seen)} "
        f"processes it started; {time.monotonic() - started:.1f} s in all"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
