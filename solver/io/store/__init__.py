"""The store: the desk's journal on SQLite, its schema and migrations, the query tables projected
from it, checkpoints and retention."""
