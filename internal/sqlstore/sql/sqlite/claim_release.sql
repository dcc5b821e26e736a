DELETE FROM {{claims}} WHERE token = ?
