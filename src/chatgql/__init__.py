"""chatgql: chat message storage and read state over GraphQL."""
