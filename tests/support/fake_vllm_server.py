"""A stand-in for `trl vllm-serve` (vLLM needs a GPU): answers /health on its port once "loaded".

  fake_vllm_server.py [--port N] [--delay S] [--pid-file F] [--fail-with FILE] [--hang]

--port defaults to GRPO_VLLM_PORT (the port the supervisor gives the attempt). --delay: seconds of "loading"
before it answers. --pid-file: its pid is appended there (tests check it was stopped). --fail-with: prints the
file and exits 1 (a failed start). --hang: loads for a minute without answering, then gives up.
"""

from __future__ import annotations

import argparse
import http.server
import os
import sys
import time


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--pid-file")
    parser.add_argument("--fail-with")
    parser.add_argument("--hang", action="store_true")
    args = parser.parse_args()
    if args.pid_file:
        with open(args.pid_file, "a") as handle:
            handle.write(f"{os.getpid()}\n")
    if args.hang:  # stuck while it loads, until stopped: only a stop that never comes outlasts this
        time.sleep(600)
        return 1
    if args.fail_with:
        print(open(args.fail_with).read(), flush=True)
        return 1
    time.sleep(args.delay)
    print("serving", flush=True)
    port = args.port or int(os.environ["GRPO_VLLM_PORT"])
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
