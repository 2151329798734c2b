"""Pure analysis: specs, verdicts, findings, stragglers, grouping, statistics."""
