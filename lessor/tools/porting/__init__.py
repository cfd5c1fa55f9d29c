"""Coming over from Poolboy and the Jumpstarter controller.

`convert` turns their manifests into lessor's (pure: YAML in, YAML and a report out);
`migrate` does the same on a live cluster and adopts what Poolboy's handles already created,
without deleting or re-creating anything. docs/migrating.md is the user's guide.
"""

from .convert import Conversion, Note, convert

__all__ = ["Conversion", "Note", "convert"]
