INSERT IGNORE INTO {{migrations}} (version, name) VALUES (?, ?)
