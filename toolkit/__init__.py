"""Speed-test matrix toolkit for vLLM servers: prefill and sustained decode, measured and reported.

Layers, high to low; a module imports only from layers below its own (`make lint` checks it with import-linter,
imports inside functions included, and that no import cycle exists at any depth; see pyproject.toml):

    toolkit.cli                        the command line; nothing imports it
    toolkit.batch                      sweeps, variants, local and Ray runners
    toolkit.jupyter                    kernels, executed notebooks, what notebooks call
    toolkit.rates                      open-loop request-rate sweeps (uses the matrix's server API and prompts)
    toolkit.reports | toolkit.matrix   independent of each other: reports read results, matrix measures
    toolkit.servers                    launched and embedded servers, the machine, GPUs
    toolkit.results                    results on disk
    toolkit.params                     run parameters
    toolkit.method                     the method as pure functions
    toolkit.loadgen                    the HTTP load generator
    toolkit.schema | toolkit.api_keys  the result record; API keys and redaction
    toolkit.errors                     the error tree
"""

__version__ = "0.1.0"
