"""Reading what the user gives: files (bounded, safe) and their resolution into specs."""
