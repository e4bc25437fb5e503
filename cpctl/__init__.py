"""cpctl: the control plane's command line, a thin client of its REST API (``/api/v1``).

It uses only the standard library and never imports Django or the server's apps, so it installs on
any machine that can reach the API: ``pip install ./cpctl`` from a checkout (docs/cli.md)."""

__version__ = "0.1.0"
