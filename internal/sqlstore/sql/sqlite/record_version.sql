INSERT OR IGNORE INTO {{migrations}} (version, name) VALUES (?, ?)
