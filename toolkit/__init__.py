"""Speed-test matrix toolkit for vLLM servers: prefill and sustained decode, measured and reported.

Layers, high to low; a module imports only from layers below its own (`make lint` checks it with import-linter,
imports inside functions included, and that no import cycle exists at any depth; see pyproject.toml):

    toolkit.cli                        the command line; nothing imports it
    toolkit.batch                      sweeps, variants, local and Ray runners
    toolkit.jupyter | .folder_check    kernels, executed notebooks, what notebooks call | a run folder checked whole
    toolkit.rates                      open-loop request-rate sweeps (uses the matrix's server API and prompts)
    toolkit.reports | toolkit.matrix   independent of each other: reports read results, matrix measures
    toolkit.servers                    launched and embedded servers, the machine, GPUs
    toolkit.results                    results on disk
    toolkit.params                     run parameters
    toolkit.request_options            what every decode request carries besides its prompt (RunParams' base)
    toolkit.method                     the method as pure functions
    toolkit.loadgen                    the HTTP load generator
    toolkit.base                       at its bottom, the error tree (base.errors); above it, independent of each
                                       other: the result record (base.schema), API keys and redaction
                                       (base.api_keys), the front end's check, the Ray driver, a file
                                       parameter made absolute (base.file_paths), YAML files read with
                                       one-line errors (base.yaml_files)
"""

import sys

# nbformat's jsonschema builds rfc3987-syntax's lark grammar when it is imported: 1-4 s of every process that reads
# or writes a notebook (python-jsonschema/jsonschema#1428), paid by each command, test worker and subprocess. The
# toolkit never checks the IRI formats it serves: skip it wherever the toolkit is imported before jsonschema.
if "rfc3987_syntax" not in sys.modules:
    sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # None: `import` raises ImportError

__version__ = "0.1.0"
CONSOLE_SCRIPT = "vllm-speedtest"  # the command pyproject.toml's [project.scripts] installs
