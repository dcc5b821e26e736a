-- Version 9: a relay claims its next batch while the previous one is still
-- published. When the previous batch ended inside a chunk, the next claim
-- takes the chunk over for the rows past it, instead of leaving them to a
-- later rescan (where, with per-key order, they would hold back their keys).
-- prev names the claim the chunk was taken from: that claim still holds rows
-- there, so its mark still counts for them, and the chunk goes back to it if
-- the new holder lets go first. Relays of an older version read a taken-over
-- chunk as held by the new claim alone: upgrade the relays of one table
-- together.
ALTER TABLE {{claims}} ADD COLUMN IF NOT EXISTS prev TEXT;
