"""Every benchmark of rtalab, one short module each, and the runner (``make bench``).

This package sits above ``sim`` and ``loadtests``: it imports both, neither imports it
except the command registrations (``rtalab serve bench``, ``rtalab check --bench``,
``rtalab load bench``) which load their benchmark lazily.
"""
