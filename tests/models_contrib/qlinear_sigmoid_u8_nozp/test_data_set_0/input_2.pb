BysJ
ף;