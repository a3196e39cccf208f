"""How much of a matrix's wall time is measurement? A small matrix on the embedded vLLM, timed by phase.

The embedded server runs at most 2 requests at once (`--max-num-seqs 2`), so the 4-stream cells queue and
their readiness gate must end on the plateau, not the timeout. Contexts 1K and 2K × 1, 2, 4 streams, 6 s
windows. The breakdown (prefill, readiness, windows, retries, drain, other) comes from each cell's recorded
times (`toolkit.method.overhead`); the 30 s estimate keeps every phase but the windows, which grow 5×.

    .venv/bin/python benchmarks/matrix_overhead.py [--duration 6]

Last line: `matrix_overhead: measured/wall=<ratio> queued_cell_wall_s=<longest 4-stream cell>`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolkit.matrix.runner import run_matrix
from toolkit.method.overhead import matrix_overhead, overhead_line
from toolkit.params import make_params
from toolkit.servers.embedded.server import EmbeddedServer, ServerConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=6.0)
    args = parser.parse_args()
    config = ServerConfig(max_model_len=4096, kv_blocks=104, max_num_seqs=2)
    with EmbeddedServer(config) as server:
        params = make_params({"base_url": server.base_url, "contexts": ["1K", "2K"], "concurrency": [1, 2, 4],
                              "duration_s": args.duration, "max_output": 1024})  # fmt: skip
        results = run_matrix(params, tempfile.mkdtemp(), progress=False)
    print(f"{'cell':14} {'status':16} {'measured s':>10} {'wall s':>7} {'ready s':>7} {'windows s':>9} "
          f"{'drain s':>7} {'attempts':>8} disturbed")  # fmt: skip
    for m in results:
        print(f"{m.phase} {m.context} ×{m.concurrency:<3} {m.status:16} {m.measured_s or m.ttft_ms / 1000:10.2f} "
              f"{m.cell_wall_s:7.2f} {m.readiness_s or 0:7.2f} {m.windows_s or 0:9.2f} {m.drain_s or 0:7.2f} "
              f"{m.attempts or 1:8} {m.disturbed or '-'}")  # fmt: skip
    spent = matrix_overhead(m.to_dict() for m in results)
    assert spent is not None
    undisturbed = matrix_overhead(m.to_dict() for m in results if not m.disturbed)
    scale = 30.0 / args.duration
    wall_30 = spent["wall_s"] - spent["windows_s"] + spent["windows_s"] * scale
    decode_measured = spent["measured_s"] - sum(m.ttft_ms / 1000 for m in results if m.phase == "prefill")
    measured_30 = spent["measured_s"] - decode_measured + decode_measured * scale
    print(f"\nall cells: {overhead_line(spent)}")
    if undisturbed is not None:
        print(f"undisturbed cells: measured/wall={undisturbed['ratio']:.2f}")
    print(f"30 s windows, same breakdown: measured {measured_30:.1f} s of {wall_30:.1f} s wall "
          f"({measured_30 / wall_30:.2f})")  # fmt: skip
    queued = max((m.cell_wall_s for m in results if m.concurrency == 4 and m.phase == "decode"), default=0.0)
    print(f"matrix_overhead: measured/wall={spent['ratio']:.2f} queued_cell_wall_s={queued:.1f}")


if __name__ == "__main__":
    main()
