"""The embedded vLLM measured directly and through a small reverse proxy that answers `/metrics` with its own
metrics (as a gateway in front of vLLM does), one after the other on the same server.

Before this session's fix, every cell behind such a proxy waited out the readiness timeout and was published as
"Requests queued" (about 125 s a cell with 4 s windows). Now the run says once that server-side statuses are
unavailable and judges the cells client-side. Prints each run's wall time and cells, then one line:
`gateway_proxy: direct_s=<s> proxy_s=<s> ratio=<proxy/direct> proxy_basis=<bases> proxy_statuses=<...> note=<yes|no>`

    .venv/bin/python benchmarks/gateway_proxy.py [--duration 4] [--concurrency 1,2,4]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.gateway_proxy import gateway
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.reports.tables import CLIENT_BASIS_NOTE, report_markdown
from toolkit.results import runs
from toolkit.servers.embedded.server import EmbeddedServer, ServerConfig


def measure(base_url: str, out: Path, duration_s: float, concurrency: list[int]) -> tuple[float, list[tuple]]:
    params = make_params({"base_url": base_url, "contexts": ["512"], "concurrency": concurrency,
                          "duration_s": duration_s, "max_output": 1024, "readiness_timeout_s": 120,
                          "control_window_s": 1, "api_key_env": "GATEWAY_BENCH_NO_KEY"})  # fmt: skip
    started = time.monotonic()
    cells = run_matrix(params, out, progress=False)
    took = time.monotonic() - started
    return took, [(m.phase, m.concurrency, m.status, m.status_basis, m.total_tok_s) for m in cells]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--concurrency", default="1,2,4")
    args = parser.parse_args()
    concurrency = [int(n) for n in args.concurrency.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    with EmbeddedServer(ServerConfig(max_model_len=4096)) as server:
        direct_s, direct = measure(server.base_url, folder / "direct", args.duration, concurrency)
        with gateway(server.base_url) as proxied_url:
            proxy_s, proxied = measure(proxied_url, folder / "proxy", args.duration, concurrency)
    for name, took, cells in (("direct", direct_s, direct), ("proxy", proxy_s, proxied)):
        print(f"{name}: {took:.1f} s")
        for phase, n, status, basis, tok_s in cells:
            print(f"  {phase} 512 x{n}: {status} ({basis}), {tok_s or 0:.0f} tok/s")
    frame, info = runs.load_run(folder / "proxy")
    noted = CLIENT_BASIS_NOTE in report_markdown(frame, info)
    decode = [c for c in proxied if c[0] == "decode"]
    print(
        f"gateway_proxy: direct_s={direct_s:.1f} proxy_s={proxy_s:.1f} ratio={proxy_s / direct_s:.2f} "
        f"proxy_basis={','.join(sorted({str(c[3]) for c in decode}))} "
        f"proxy_statuses={','.join(str(c[2]) for c in decode)} note={'yes' if noted else 'no'}"
    )


if __name__ == "__main__":
    main()
