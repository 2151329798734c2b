"""The performance debugger: a read-only host snapshot, version drift, and the uneven-NCCL and
slow-filesystem workflows built on it. Thin glue: argv from probes, run through the transport,
parse, judge in analysis."""
