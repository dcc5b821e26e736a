-- A claim is one short write transaction: drop expired claims
-- (claim_expire), read the due rows outside every live claim's id range
-- (claim), record this claim's range with its lease (claim_record). The
-- rows themselves are written once, when marked.
DELETE FROM {{claims}} WHERE until <= strftime('%Y-%m-%d %H:%M:%f', 'now')
