-- claim_release is release_chunks alone, its token $1.
UPDATE {{claims}} SET {{> release_set $1}} WHERE token = $1 OR prev = $1
