"""node_modules holds third-party packages, never tests of ours."""

collect_ignore_glob = ["node_modules/*"]
