-- A rescan drops the leases that ran out first.
DELETE FROM {{claims}} WHERE until <= UTC_TIMESTAMP(6)
