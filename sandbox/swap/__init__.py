"""The sandbox swap API and history API (spec 4, 7): HTTP, rules, the service and its store."""
