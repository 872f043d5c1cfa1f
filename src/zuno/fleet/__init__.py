"""Fleet workers: sessions queued in PostgreSQL and the workers that run them."""
