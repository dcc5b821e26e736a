INSERT INTO {{claims}} (token, lo, hi, until)
VALUES (?1, ?2, ?3, strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', ?4 / 1000.0)))
