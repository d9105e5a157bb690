"""Use cases. check_* authorizes and validates; do_* writes, one transaction each.

Nothing here imports strawberry; errors are chatgql.errors.
"""
