"""The base every layer stands on: the error tree, the result record, API keys and redaction, the notebook front
end's check, the Ray driver's connection, and a file parameter made absolute."""
