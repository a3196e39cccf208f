"""The JSON documents of a run folder besides run.json, each one typed model with one reader and one writer.

    sweep.json     a rate sweep's parameters as run and its search's result (SweepDocument, `rates/` of a run)
    steps.jsonl    one line per finished step of that sweep (RateStep; no schema_version: sweep.json's covers it)
    server.json    the server the toolkit launched for a run, and how it ended (ServerRecord)
    batch.json     a batch's variants in order and each one's state, and the comparison's outcome (BatchDocument;
                   an interleaved batch's paired comparisons: CompareBlock, PairedComparison)

and run.json's blocks (run_blocks: launch, server, environment, params, fingerprint, overhead, control, capacity),
which toolkit.results.run_document's RunDocument holds.

Each file is stamped with the toolkit's `schema_version` when written, read back refusing a newer one in one line,
and read unchanged when written before stamping (toolkit.results.store). Fields a model does not name are kept
(`extra="allow"`) and written back, each object's keys in the order read (base.Block).
"""
