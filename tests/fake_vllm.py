"""The fault server as a process of its own, for the managed-server tests: `python -m tests.fake_vllm --port P`.

Like vLLM it takes its key from VLLM_API_KEY, binds a socket in VLLM_RPC_BASE_PATH (its ZMQ sockets' folder) and
writes a `vllm_dist_<hex>` file store in the temporary folder, leaves both there, prints start-up lines to its log
(stdout) and stops on SIGTERM (with `--ignore-sigterm`, only SIGKILL stops it).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import tempfile
import threading
import uuid
from pathlib import Path

from tests.faultserver import FaultServer

BANNER = "fake vLLM: serving fault-model"
DIST_STORE = "vllm_dist_"  # vLLM's torch.distributed file store: vllm.utils.network_utils


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ignore-sigterm", action="store_true", help="say so in the log and go on (SIGKILL only)")
    parser.add_argument("-H", "--header", action="append", help="taken and ignored, as a proxy's header would be")
    args = parser.parse_args()
    stop = threading.Event()

    def ignore(*_: object) -> None:
        print("fake vLLM: SIGTERM ignored", flush=True)

    signal.signal(signal.SIGTERM, ignore if args.ignore_sigterm else lambda *_: stop.set())
    if ipc := os.environ.get("VLLM_RPC_BASE_PATH"):
        socket.socket(socket.AF_UNIX).bind(os.path.join(ipc, str(uuid.uuid4())))
    Path(tempfile.gettempdir(), f"{DIST_STORE}{uuid.uuid4().hex}").write_bytes(b"\0" * 8)
    with FaultServer(api_key=os.environ.get("VLLM_API_KEY"), port=args.port) as server:
        print(f"{BANNER} on {server.base_url}", flush=True)
        print("fake vLLM: ready for requests", flush=True)
        while not stop.wait(0.5):
            pass
    print("fake vLLM: stopped", flush=True)


if __name__ == "__main__":
    main()
