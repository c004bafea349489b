"""Rate limits of keys and tenants, the allowance of failed authentications per client
address, and the admission of a request under them."""
