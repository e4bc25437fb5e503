"""Commands from the control plane, run on the node: each key at most once (``store``, kept on disk),
as a supervised process (``runner``), one invasive command at a time (``executor``). The messages are
``agents/protocol/commands.py``'s; docs/runs-and-commands.md follows one from the server to here."""
