BysJ
ף<