"""kgc package."""
