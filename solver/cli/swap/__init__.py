"""``solver swap …``: moving inventory by hand through the swap API, and the rebalancer's
records."""
