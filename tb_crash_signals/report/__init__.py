"""The report stage: the JSON document every adapter shares, and its output formats."""
