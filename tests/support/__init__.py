"""What the tests share: builders of series and event files, a plugin harness, servers and a browser."""
