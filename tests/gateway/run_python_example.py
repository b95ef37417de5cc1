#!/usr/bin/python3
"""Runs examples/speculative_scheduler.py against a `distsample serve --model ngram` started
here on a Unix socket, then stops the server with SIGTERM. Arguments: the distsample binary, the
source tree, the directory holding the generated distsample_pb2.py."""

import os
import signal
import subprocess
import sys
import tempfile
import time

distsample, source_dir, pb2_dir = sys.argv[1:4]
with tempfile.TemporaryDirectory() as tmp:
    sock = os.path.join(tmp, "gateway.sock")
    server = subprocess.Popen([distsample, "serve", "--model", "ngram", "--tp", "2", "--listen", "", "--unix-socket", sock,
                               "--set", "max_tokens_per_req=4"], stdout=subprocess.PIPE, text=True)
    try:
        ready = server.stdout.readline()  # printed once the listeners are bound
        print(ready, end="")
        if "distsample serve:" not in ready or not os.path.exists(sock):
            sys.exit(f"the server did not start: {ready!r}")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([pb2_dir, os.path.join(source_dir, "clients", "python")]))
        started = time.monotonic()
        example = subprocess.run([sys.executable, os.path.join(source_dir, "examples", "speculative_scheduler.py"),
                                  "--address", "unix:" + sock, "--steps", "8", "--requests", "3"],
                                 env=env, capture_output=True, text=True, timeout=120)
        print(example.stdout, end="")
        print(example.stderr, end="", file=sys.stderr)
        if example.returncode != 0:
            sys.exit(f"the example failed with exit code {example.returncode}")
        for expected in ("step  0 (sample)", "step  8 (verify)", "acceptance rate:"):
            if expected not in example.stdout:
                sys.exit(f"the example's output lacks {expected!r}")
        print(f"example ran in {time.monotonic() - started:.1f} s")
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=30)
    if code != 0:
        sys.exit(f"the server exited with {code} after SIGTERM")
