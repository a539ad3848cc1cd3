"""Example methods, written as ``docs/write-a-method.md`` shows (not registered by default:
a program registers the one it runs, as the page's test does)."""
