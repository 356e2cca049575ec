"""The local engine: segment files, the offsets journal, group-commit fsync, the cleaner."""
