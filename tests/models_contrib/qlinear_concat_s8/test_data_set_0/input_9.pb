BcsJ
ף=