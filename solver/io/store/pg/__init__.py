"""The journal on PostgreSQL: several instances of one account share it, one active at a time
under a lease whose epoch fences every group commit (DESIGN "Persistence is the desk's
journal"; docs/operations.md "Two instances")."""
