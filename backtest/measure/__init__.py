"""What a replay measures: counts, fills with markouts, series, per-pair detail."""
