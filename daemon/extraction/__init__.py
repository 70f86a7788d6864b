"""Extraction: parsers turn a file into pages of positioned text; providers turn
pages plus a schema into a result with per-field evidence."""
