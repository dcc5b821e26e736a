SELECT coalesce((SELECT seqcache FROM pg_sequence WHERE seqrelid = {{> id_sequence}}), 1)
