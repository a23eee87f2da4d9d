"""The demo accounts, importable without Django (the launcher prints them)."""

# (username, password, team, role); root is the site admin.
DEMO_USERS = [
    ("alice", "alice-gpuqueue", "team-a", "member"),
    ("bob", "bob-gpuqueue", "team-a", "admin"),
    ("carol", "carol-gpuqueue", "team-b", "member"),
    ("dave", "dave-gpuqueue", "inference", "member"),
]
ROOT = ("root", "root-gpuqueue")
