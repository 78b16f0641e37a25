"""The bottom layer, leaf utilities: tokenizers, untrusted text, spaces, the loop runner, shared errors
and JSONL helpers. Nothing here imports from the rest of the package."""
