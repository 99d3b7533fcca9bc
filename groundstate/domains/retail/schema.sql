-- Northwind Goods retail world. Portable SQL: runs unchanged on SQLite and PostgreSQL 15.
-- Money is REAL rounded to cents by the tools, flags are INTEGER 0/1, dates are ISO 'YYYY-MM-DD' TEXT.
-- Tables are listed in foreign-key order.

CREATE TABLE customers (
    id         INTEGER PRIMARY KEY,
    first_name TEXT NOT NULL,
    last_name  TEXT NOT NULL,
    email      TEXT NOT NULL UNIQUE,
    phone      TEXT NOT NULL,
    tier       TEXT NOT NULL CHECK (tier IN ('standard', 'silver', 'gold')),
    joined_on  TEXT NOT NULL
);

-- Saved addresses; an order copies the address it ships to, so editing one never rewrites history.
CREATE TABLE addresses (
    id          INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    label       TEXT NOT NULL,
    street      TEXT NOT NULL,
    city        TEXT NOT NULL,
    state       TEXT NOT NULL,
    zip         TEXT NOT NULL,
    is_default  INTEGER NOT NULL CHECK (is_default IN (0, 1))
);

-- One row per sellable variant; variants of a product share its name and price.
CREATE TABLE products (
    id         INTEGER PRIMARY KEY,
    sku        TEXT NOT NULL UNIQUE,
    name       TEXT NOT NULL,
    variant    TEXT NOT NULL,
    category   TEXT NOT NULL CHECK (category IN ('electronics', 'home', 'kitchen', 'apparel', 'footwear', 'outdoors', 'toys', 'beauty')),
    price      REAL NOT NULL CHECK (price >= 0),
    stock      INTEGER NOT NULL CHECK (stock >= 0),
    returnable INTEGER NOT NULL CHECK (returnable IN (0, 1)),
    active     INTEGER NOT NULL CHECK (active IN (0, 1))
);

CREATE TABLE orders (
    id            INTEGER PRIMARY KEY,
    customer_id   INTEGER NOT NULL REFERENCES customers (id),
    status        TEXT NOT NULL CHECK (status IN ('pending', 'processing', 'shipped', 'delivered', 'cancelled')),
    placed_on     TEXT NOT NULL,
    shipped_on    TEXT,
    delivered_on  TEXT,
    cancelled_on  TEXT,
    cancel_reason TEXT CHECK (cancel_reason IN ('no_longer_needed', 'ordered_by_mistake', 'found_better_price', 'delivery_too_slow', 'other')),
    ship_street   TEXT NOT NULL,
    ship_city     TEXT NOT NULL,
    ship_state    TEXT NOT NULL,
    ship_zip      TEXT NOT NULL,
    subtotal      REAL NOT NULL CHECK (subtotal >= 0),
    shipping_fee  REAL NOT NULL CHECK (shipping_fee >= 0),
    total         REAL NOT NULL CHECK (total >= 0)
);

-- unit_price is the price paid, which may differ from the product's current price.
CREATE TABLE order_items (
    id         INTEGER PRIMARY KEY,
    order_id   INTEGER NOT NULL REFERENCES orders (id),
    product_id INTEGER NOT NULL REFERENCES products (id),
    quantity   INTEGER NOT NULL CHECK (quantity > 0),
    unit_price REAL NOT NULL CHECK (unit_price >= 0)
);

CREATE TABLE payments (
    id         INTEGER PRIMARY KEY,
    order_id   INTEGER NOT NULL REFERENCES orders (id),
    method     TEXT NOT NULL CHECK (method IN ('card', 'paypal', 'gift_card')),
    card_last4 TEXT,
    amount     REAL NOT NULL CHECK (amount > 0),
    paid_on    TEXT NOT NULL
);

CREATE TABLE returns (
    id            INTEGER PRIMARY KEY,
    order_id      INTEGER NOT NULL REFERENCES orders (id),
    reason        TEXT NOT NULL CHECK (reason IN ('changed_mind', 'wrong_size', 'not_as_described', 'defective')),
    status        TEXT NOT NULL CHECK (status IN ('requested', 'received', 'refunded', 'rejected')),
    requested_on  TEXT NOT NULL,
    refund_amount REAL NOT NULL CHECK (refund_amount >= 0)
);

CREATE TABLE return_items (
    id            INTEGER PRIMARY KEY,
    return_id     INTEGER NOT NULL REFERENCES returns (id),
    order_item_id INTEGER NOT NULL REFERENCES order_items (id),
    quantity      INTEGER NOT NULL CHECK (quantity > 0)
);

-- Money sent back to a payment; the sum of a payment's refunds never exceeds its amount.
CREATE TABLE refunds (
    id         INTEGER PRIMARY KEY,
    payment_id INTEGER NOT NULL REFERENCES payments (id),
    return_id  INTEGER REFERENCES returns (id),
    amount     REAL NOT NULL CHECK (amount > 0),
    reason     TEXT NOT NULL CHECK (reason IN ('order_cancelled', 'return', 'damaged_item', 'price_adjustment', 'late_delivery')),
    issued_on  TEXT NOT NULL
);

CREATE TABLE support_tickets (
    id          INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    order_id    INTEGER REFERENCES orders (id),
    category    TEXT NOT NULL CHECK (category IN ('delivery', 'product_issue', 'billing', 'account', 'other')),
    priority    TEXT NOT NULL CHECK (priority IN ('normal', 'high', 'urgent')),
    status      TEXT NOT NULL CHECK (status IN ('open', 'pending', 'resolved', 'closed')),
    subject     TEXT NOT NULL,
    description TEXT NOT NULL,
    opened_on   TEXT NOT NULL,
    updated_on  TEXT NOT NULL
);

-- The agent's record of what it did or refused, on the customer's account (and the order, if any).
CREATE TABLE notes (
    id          INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    order_id    INTEGER REFERENCES orders (id),
    body        TEXT NOT NULL,
    created_on  TEXT NOT NULL
);

CREATE TABLE escalations (
    id          INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    order_id    INTEGER REFERENCES orders (id),
    category    TEXT NOT NULL CHECK (category IN ('refund_approval', 'account_security', 'policy_exception')),
    status      TEXT NOT NULL CHECK (status IN ('open', 'closed')),
    reason      TEXT NOT NULL,
    created_on  TEXT NOT NULL
);
