"""SQLite's migrations 1 to 10, as they were shipped (:data:`HISTORY`): an SQLite store older
than version 10 walks them (:func:`solver.io.store.migrations.migrate`).

A shipped migration is never edited, so this is data, frozen: a module of its own since issue
29 (:mod:`solver.io.store.migrations` had grown past the project's size, 424 lines, and this
was most of it), beside the code that applies it and the migrations after 10, which are
written once for both backends. A test checks that walking it gives the schema of
:data:`~solver.io.store.tables.TABLES` (``tests/io/test_store_tables.py``).
"""

from __future__ import annotations

_QUOTE_COLUMNS = (
    "quote_id, quote_hash, created_at, deadline, asset_in, asset_out, amount_in, amount_out, "
    "fee, nonce, signed_data, state, intent_hash, tx_hash, reason, updated_at, exact_in, "
    "partner_id"
)
_JSON_TEXT = ("plan", "quote_request", "quote_response", "deposit_signed", "status_response")
_REBALANCE_DOC = ", ".join(
    f"'{column}', " + (f"json({column})" if column in _JSON_TEXT else column)
    for column in (
        "id", "created_at", "updated_at", "state", "asset", "asset_in", "asset_out", "amount_in",
        "plan", "reason", "quote_request", "quote_response", "quote_signature",
        "deposit_address", "deposit_memo", "amount_out", "min_amount_out",
        "deposit_intent_hash", "deposit_signed", "deposit_nonce", "deposit_deadline",
        "deposit_tx_hash", "swap_status", "status_response", "finished_at",
    )
)  # fmt: skip
"""Migration 10's document of a ``rebalances`` row (its JSON columns embedded as JSON)."""
HISTORY: tuple[tuple[str, ...], ...] = (
    # 1: the quote journal: every signed quote, its nonce, and its state changes.
    (
        """CREATE TABLE quotes (
            quote_id TEXT PRIMARY KEY,
            quote_hash TEXT NOT NULL UNIQUE,
            created_at TEXT NOT NULL,
            deadline TEXT NOT NULL,
            asset_in TEXT NOT NULL,
            asset_out TEXT NOT NULL,
            amount_in TEXT NOT NULL,
            amount_out TEXT NOT NULL,
            fee TEXT NOT NULL,
            nonce BLOB NOT NULL,
            signed_data TEXT NOT NULL,
            state TEXT NOT NULL,
            intent_hash TEXT,
            tx_hash TEXT,
            reason TEXT,
            updated_at TEXT
        )""",
        "CREATE INDEX quotes_created_at ON quotes (created_at)",
        "CREATE INDEX quotes_open ON quotes (state) WHERE state IN ('OPEN', 'WON', 'SETTLING')",
        """CREATE TABLE transitions (
            id INTEGER PRIMARY KEY,
            quote_id TEXT NOT NULL,
            old TEXT NOT NULL,
            new TEXT NOT NULL,
            at TEXT NOT NULL,
            reason TEXT,
            intent_hash TEXT,
            tx_hash TEXT
        )""",
        "CREATE INDEX transitions_quote_id ON transitions (quote_id)",
        """CREATE TABLE nonces (
            account TEXT NOT NULL,
            nonce TEXT NOT NULL,
            quote_id TEXT,
            signed_at TEXT NOT NULL,
            PRIMARY KEY (account, nonce)
        ) WITHOUT ROWID""",
    ),
    # 2: what settled and what it earned, balance snapshots, alerts.
    (
        """CREATE TABLE fills (
            quote_id TEXT PRIMARY KEY,
            quote_hash TEXT NOT NULL,
            intent_hash TEXT,
            tx_hash TEXT,
            at TEXT NOT NULL,
            asset_in TEXT NOT NULL,
            amount_in TEXT NOT NULL,
            asset_out TEXT NOT NULL,
            amount_out TEXT NOT NULL,
            fee TEXT NOT NULL,
            price_in_usd TEXT,
            price_out_usd TEXT,
            realized_pnl_usd TEXT,
            markouts TEXT NOT NULL DEFAULT '{}'
        )""",
        "CREATE INDEX fills_at ON fills (at)",
        """CREATE TABLE balance_snapshots (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,
            asset TEXT NOT NULL,
            amount TEXT NOT NULL,
            expected TEXT
        )""",
        "CREATE INDEX balance_snapshots_at ON balance_snapshots (at)",
        """CREATE TABLE alerts (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,
            kind TEXT NOT NULL,
            detail TEXT NOT NULL,
            resolved_at TEXT
        )""",
        "CREATE INDEX alerts_open ON alerts (kind) WHERE resolved_at IS NULL",
    ),
    # 3: a sample of the quote requests seen; the request side of each quote.
    (
        """CREATE TABLE requests (
            id INTEGER PRIMARY KEY,
            ts TEXT NOT NULL,
            quote_id TEXT NOT NULL,
            asset_in TEXT NOT NULL,
            asset_out TEXT NOT NULL,
            exact_in INTEGER NOT NULL,
            amount TEXT NOT NULL,
            min_deadline_ms INTEGER NOT NULL,
            partner_id TEXT,
            outcome TEXT NOT NULL,
            reason TEXT
        )""",
        "CREATE INDEX requests_ts ON requests (ts)",
        "ALTER TABLE quotes ADD COLUMN exact_in INTEGER",
        "ALTER TABLE quotes ADD COLUMN partner_id TEXT",
    ),
    # 4: rebalances through the swap API, each step as it happened (solver.rebalance.rebalancer).
    (
        """CREATE TABLE rebalances (
            id TEXT PRIMARY KEY,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            state TEXT NOT NULL,
            asset TEXT NOT NULL,
            asset_in TEXT NOT NULL,
            asset_out TEXT NOT NULL,
            amount_in TEXT NOT NULL,
            plan TEXT NOT NULL,
            reason TEXT,
            quote_request TEXT,
            quote_response TEXT,
            quote_signature TEXT,
            deposit_address TEXT,
            deposit_memo TEXT,
            amount_out TEXT,
            min_amount_out TEXT,
            deposit_intent_hash TEXT,
            deposit_signed TEXT,
            deposit_nonce TEXT,
            deposit_deadline TEXT,
            deposit_tx_hash TEXT,
            swap_status TEXT,
            status_response TEXT,
            finished_at TEXT
        )""",
        "CREATE INDEX rebalances_created_at ON rebalances (created_at)",
        "CREATE INDEX rebalances_open ON rebalances (state) WHERE finished_at IS NULL",
        """CREATE TABLE rebalance_steps (
            id INTEGER PRIMARY KEY,
            rebalance_id TEXT NOT NULL,
            at TEXT NOT NULL,
            state TEXT NOT NULL,
            detail TEXT
        )""",
        "CREATE INDEX rebalance_steps_rebalance_id ON rebalance_steps (rebalance_id)",
    ),
    # 5: the desk's journal (solver.core.facts): every state change, in order, and snapshots of
    # the desk that let a restart apply only what came after them.
    (
        """CREATE TABLE journal (
            seq INTEGER PRIMARY KEY,
            at INTEGER NOT NULL,
            kind TEXT NOT NULL,
            body TEXT NOT NULL
        )""",
        """CREATE TABLE desk_snapshots (
            seq INTEGER PRIMARY KEY,
            at INTEGER NOT NULL,
            body TEXT NOT NULL
        )""",
    ),
    # 6: how far the query tables (quotes, transitions, fills, balances, alerts) have been
    # derived from the journal: the quote path appends only the journal (and, before version 8,
    # the nonce), and the projection catches up in batches, off the quote path
    # (solver.io.store.projection).
    (
        "CREATE TABLE projection (seq INTEGER NOT NULL)",
        # A version-5 store projected each fact as it was appended: all of it is done.
        "INSERT INTO projection (seq) SELECT COALESCE(MAX(seq), 0) FROM journal",
    ),
    # 7: no UNIQUE index on quotes.quote_hash. Nothing looks a quote up by its hash in the
    # store (the desk keeps its own map), and the index, keyed by a random hash, cost the
    # projection ~15 µs and a random B-tree page of WAL per answer (issue 11). SQLite drops a
    # column constraint only by rebuilding the table: once, ~15 s per million quotes (measured).
    # The new table is spelled out, not derived from migration 1's text: a migration is a
    # frozen record of what it did.
    (
        """CREATE TABLE quotes_v7 (
            quote_id TEXT PRIMARY KEY,
            quote_hash TEXT NOT NULL,
            created_at TEXT NOT NULL,
            deadline TEXT NOT NULL,
            asset_in TEXT NOT NULL,
            asset_out TEXT NOT NULL,
            amount_in TEXT NOT NULL,
            amount_out TEXT NOT NULL,
            fee TEXT NOT NULL,
            nonce BLOB NOT NULL,
            signed_data TEXT NOT NULL,
            state TEXT NOT NULL,
            intent_hash TEXT,
            tx_hash TEXT,
            reason TEXT,
            updated_at TEXT,
            exact_in INTEGER,
            partner_id TEXT
        )""",
        f"INSERT INTO quotes_v7 ({_QUOTE_COLUMNS}) SELECT {_QUOTE_COLUMNS} FROM quotes",  # noqa: S608 (constants)
        "DROP TABLE quotes",
        "ALTER TABLE quotes_v7 RENAME TO quotes",
        "CREATE INDEX quotes_created_at ON quotes (created_at)",
        "CREATE INDEX quotes_open ON quotes (state) WHERE state IN ('OPEN', 'WON', 'SETTLING')",
    ),
    # 8: the prefixes of the bot's quote nonce sequences, one per start
    # (solver.protocol.nonce.NonceSequence). Quote nonces are unique by construction and no
    # longer write a ``nonces`` row each: keyed by a random nonce, that row cost the quote path
    # ~26 µs and a random B-tree page of WAL per answer (issue 11). ``nonces`` keeps the
    # nonces of rebalance deposits, and of the quotes signed before this version.
    (
        """CREATE TABLE nonce_prefixes (
            account TEXT NOT NULL,
            prefix BLOB NOT NULL,
            claimed_at TEXT NOT NULL,
            PRIMARY KEY (account, prefix)
        )""",
    ),
    # 9: no partial index of the open quotes. Nothing queries the table by state since the
    # desk is rebuilt from the journal (it was for the old restart's ``load_open_quotes``),
    # and every quote entered it at projection and left it when it expired: ~8 µs and a
    # random B-tree page per answer, about a fifth of the projection (issue 11).
    ("DROP INDEX IF EXISTS quotes_open",),
    # 10: rebalances are desk facts (``rebalance_stepped``, solver.core.rebalancing): the
    # journal carries each step and the ``rebalances`` tables are projected from it. The
    # unfinished rows of an older store, which its rebalancer wrote itself, are carried into
    # the journal as one ``carried`` step each (the row as it is: their steps are in
    # ``rebalance_steps`` already), so the desk holds them and the rebalancer takes them up.
    # The document is the row, column for column (solver.core.rebalance_record.record_doc).
    (
        f"""INSERT INTO journal (at, kind, body)
        SELECT CAST(strftime('%s', updated_at) AS INTEGER) * 1000000
                   + CAST(substr(updated_at, 21, 6) AS INTEGER),
               'rebalance_stepped',
               json_object('record', json_object({_REBALANCE_DOC}), 'detail', NULL,
                           'carried', json('true'))
        FROM rebalances WHERE finished_at IS NULL ORDER BY created_at""",  # noqa: S608 (constants)
    ),
)
"""SQLite's migrations 1 to 10, frozen."""
