"""Small apps for worker processes that each serve only some workflows or queues."""
