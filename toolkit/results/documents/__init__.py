"""The JSON documents of a run folder besides run.json, each one typed model with one reader and one writer.

    sweep.json     a rate sweep's parameters as run and its search's result (SweepDocument, `rates/` of a run)
    server.json    the server the toolkit launched for a run, and how it ended (ServerRecord)
    batch.json     a batch's variants in order and each one's state (BatchDocument)

and run.json's blocks (run_blocks: launch, server, environment, params, fingerprint, overhead, control, capacity),
which toolkit.results.run_document's RunDocument holds.

Each file is stamped with the toolkit's `schema_version` when written, read back refusing a newer one in one line,
and read unchanged when written before stamping (toolkit.results.store). Fields a model does not name are kept
(`extra="allow"`) and written back, each object's keys in the order read (base.Block).
"""
