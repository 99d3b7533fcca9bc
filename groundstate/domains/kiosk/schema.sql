CREATE TABLE kiosk_members (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  email TEXT NOT NULL UNIQUE,
  tier TEXT NOT NULL CHECK (tier IN ('basic', 'silver', 'gold')),
  credit REAL NOT NULL DEFAULT 0
);
CREATE TABLE kiosk_orders (
  id INTEGER PRIMARY KEY,
  member_id INTEGER NOT NULL REFERENCES kiosk_members(id),
  item TEXT NOT NULL,
  total REAL NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'shipped', 'cancelled'))
);
CREATE TABLE kiosk_notes (
  id INTEGER PRIMARY KEY,
  member_id INTEGER NOT NULL REFERENCES kiosk_members(id),
  body TEXT NOT NULL
);
