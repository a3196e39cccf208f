"""Other tools' result files (vllm bench serve, GuideLLM, AIPerf) read into our per-request records."""
