"""Certificates made at run time, and the names of a serving folder's files."""
