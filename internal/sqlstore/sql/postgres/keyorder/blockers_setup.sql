-- blockers_setup keeps blockers on its indexes, as the claim's setup does.
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true), set_config('jit', 'off', true)
