"""The daemon's durable state: the StateStore protocol, SQLite and DynamoDB."""
